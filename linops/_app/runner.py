"""Running one measurement of ``python -m linops bench`` in a fresh subprocess, so that its
peak memory (RSS, including C and XLA allocations) is its own, and collecting the result as a
dict.

The parent (``bench``) calls :func:`run_in_child` per (method, size); the child runs
:func:`run_one` and prints its row as one JSON line prefixed with ``@@``. Sizes a method cannot
afford are reported, not run: a dense n×n gradient beyond :data:`DENSE_BUDGET` bytes ("needs
206 GB"), a dense O(n³) solve beyond :data:`DENSE_SOLVE_MAX_N` unknowns.
"""

from __future__ import annotations

import sys
import time

from .child import in_child, peak_rss, rss_now
from .methods import METHODS, problem, row_label

DENSE_BUDGET = 4 * 2**30  # bytes a dense n×n method may take before it is reported, not run
DENSE_SOLVE_MAX_N = 6000  # dense O(n³) solves above this are reported, not run
BEST_OF_S = 1.0  # runs are added (up to BEST_OF_MAX) while their total is below this
BEST_OF_MAX = 5


def _timed(fn):
    """(seconds, result) of one call of ``fn``."""
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def _best(fn, first: tuple, jit: bool) -> tuple:
    """(time, result): the best of the first (cold) run and more, for every method alike, so
    that what a loop pays per evaluation once it runs is what counts (a library's kept state,
    e.g. ``sv.analyses``, and a hand-written script's warm allocator): at least two runs, and
    more while all of them together took under :data:`BEST_OF_S` (at most :data:`BEST_OF_MAX`):
    a 0.1 s row's best of two swung 0.7×–1.5× between runs on a 2-core machine. A JIT method's
    first run compiled, so it never counts."""
    runs = [] if jit else [first]
    while len(runs) < 2 or (len(runs) < BEST_OF_MAX and sum(r[0] for r in runs) < BEST_OF_S):
        runs.append(_timed(fn))
    return min(runs, key=lambda x: x[0])


def run_one(slug: str, nx: int, kind: str = "spd") -> dict:
    """Measure method ``slug`` on the nx×nx problem (run this in a fresh process).

    Memory: peak RSS increase of the first full run over the state after building the problem
    and a warm-up on a tiny one (imports excluded; JIT compilation included). Time: the best of
    two to five runs (:func:`_best`), the cold one included (JAX methods: runs after the one
    that compiled at this shape); ``forward_s`` likewise for the value alone.

    Parameters
    ----------
    slug : str
        A key of ``methods.METHODS``.
    nx : int
        Grid side: n = nx·(nx+1) unknowns.
    kind : str
        The problem (``methods.PROBLEMS``): ``"spd"`` (heat conduction) or ``"nonsymmetric"``
        (convection–diffusion on the same pattern).

    Returns
    -------
    dict
        method, label (with the engine the cache ran, for linops methods), n, nnz and either
        time_s, forward_s, ratio, peak_mb and the method's own facts (factorizations,
        payload_bytes, kind), or ``skipped`` with the reason.

    Examples
    --------
    >>> r = run_one("lu", 3)
    >>> r["label"], r["n"], r["factorizations"], r["payload_bytes"]        # RankOne(−λ, u)
    ('linops LU (SuperLU)', 12, 1, 192)
    >>> run_one("dense-gradient", 160)["skipped"]      # n = 25 760: 8 bytes × n² do not fit
    'needs 5 GB'
    """
    m = METHODS[slug]
    fam, b, theta, a = problem(nx, kind)
    n, nnz = fam.shape[0], fam.pattern.nnz
    spd = kind == "spd"
    out = {"method": slug, "label": m.label, "n": n, "nnz": nnz, "problem": kind}
    if m.spd_only and not spd:
        return {**out, "skipped": "SPD only"}
    if m.dense_bytes and m.dense_bytes * n * n > DENSE_BUDGET:
        return {**out, "skipped": f"needs {m.dense_bytes * n * n / 1e9:.0f} GB"}
    if m.dense_solve and n > DENSE_SOLVE_MAX_N:
        return {**out, "skipped": "not run: O(n³) dense LU"}
    for fn in m.build(*problem(6, kind), spd=spd)[:2]:  # warm-up: imports, JIT compilation
        fn()
    forward, full, extra = m.build(fam, b, theta, a, spd=spd)
    base = rss_now()
    t_cold, res = _timed(full)
    peak = peak_rss() - base
    t_full, res = _best(full, (t_cold, res), m.jit)
    t_fwd = _best(forward, _timed(forward), m.jit)[0]
    facts = extra(res)
    return {**out, "label": row_label(m, facts.get("kind")), "time_s": t_full,
            "forward_s": t_fwd, "ratio": t_full / t_fwd, "peak_mb": max(peak, 0) / 2**20,
            **facts}


def run_in_child(slug: str, nx: int, timeout: float, kind: str = "spd") -> dict:
    """:func:`run_one` in a fresh interpreter (:func:`~linops._app.child.in_child`); a failure
    comes back as a short 'skipped' reason, the last line of the child's stderr under
    ``error``."""
    base = {"method": slug, "label": METHODS[slug].label, "n": nx * (nx + 1), "problem": kind}
    r = in_child("runner", f"run_one({slug!r}, {nx}, {kind!r})", base, timeout)
    if "error" in r:
        r["skipped"] = f"failed: {r['error'].split(':')[0][:40]}"
    return r


def progress(i: int, total: int, label: str) -> None:
    """A one-line progress bar on stderr, redrawn in place (``i`` of ``total`` done, then what
    runs now); a newline when ``i == total``."""
    w = 30
    done = int(w * i / max(total, 1))
    sys.stderr.write(f"\r[{'#' * done}{'.' * (w - done)}] {i}/{total} {label[:48]:<48}")
    sys.stderr.flush()
    if i == total:
        sys.stderr.write("\n")
