"""``python -m linops bench lstsq``: sparse least squares min ‖Ax − b‖ and its ∂A, each
measurement in its own process.

    python -m linops bench lstsq [--m 200000] [--n 50000] [--cond 1e8] [--repeat 2]

Three tables and the targets they print:

- timing at m × n (default 200 000 × 50 000, cond ≈ 1e8 by column scaling, three bands per
  block so the fill stays bounded): ``sv.QR`` (SuiteSparseQR) — factorization and x = A⁺b —
  alone, against value + ∂A cotangent (``ad.solve_pullback``: the rank-2 lazy r λᴴ − (Aλ) xᴴ,
  O(m + n) bytes) and against value + ∂A on A's pattern (its SDDMM, ``lo.project``); the
  variants interleaved ``--repeat`` times, each run in a fresh process, best kept — target:
  value + ∂A ≤ 1.3× the QR solve;
- the normal equations at cond 1e10 (m = 60, n = 20): the directional derivative of
  f = Σx along a random dA by QR, by the normal equations (Cholesky of AᵀA, and
  ``numpy.linalg.solve`` of AᵀA) and by the normal equations' own formula, against central
  differences in 50-digit arithmetic (mpmath) — target: QR to 1e-6;
- LinearSolve.jl's reverse ∂A of a non-square solve (it applies the square rule −λxᴴ): a
  tall 7×4 A and the wide 4×7 case, f = Σ A⁺b, ∂A against central differences — ours and
  the square rule's error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv

from . import docs
from .child import hwm, in_child, positive, reset_peak, rss_now
from .legends import legend
from .report import closing_lines, markdown_table, publish

VARIANTS = ("QR solve", "value + ∂A", "value + ∂A on pattern")


def matrix(m: int, n: int, cond: float, seed: int = 0) -> sp.csr_array:
    """A sparse m×n (m a multiple of n) with full column rank and cond ≈ ``cond``: m/n stacked
    banded n×n blocks (three bands each, their offsets different per block: bounded fill),
    columns scaled by a shuffled log-spaced 1 … 1/cond.

    >>> A = matrix(40, 10, 1e4)
    >>> A.shape, bool(np.linalg.cond(A.toarray()) > 1e3)
    ((40, 10), True)
    """
    rng = np.random.default_rng(seed)
    blocks = []
    for i in range(m // n):
        off = [0, i + 1, -(2 * i + 3)]
        vals = [rng.uniform(1.0, 2.0, n - abs(o)) for o in off]
        blocks.append(sp.diags(vals, off, shape=(n, n)))
    A = sp.vstack(blocks).tocsr()
    scale = np.logspace(0, -np.log10(cond), n)
    rng.shuffle(scale)
    return sp.csr_array(A @ sp.diags(scale))


def _run(variant: str, A, b):
    """One run of ``variant``: init + solve [+ pullback [+ projection]]; its facts and the
    wall/CPU seconds of the solve part and of what follows it.

    f = Σx, so x̄ = 1 and ∂A = r λᴴ − (Aλ) xᴴ with λ = (AᴴA)⁻¹1 (R⁻ᴴ then R⁻¹ from the same
    factorization). Returns ``factorizations``, ``solve_s``/``solve_cpu_s`` (sv.solve) and,
    with the pullback, ``grad_s``/``grad_cpu_s`` (the pullback, and the projection),
    ``cotangent`` (type and rank), ``cotangent_bytes`` and, projected, ``projected_bytes``
    (the values on A's pattern)."""
    w, c = time.perf_counter(), time.process_time()
    sol = sv.solve(sv.LeastSquares(A, b), sv.QR())
    out = {"factorizations": sol.stats.factorizations,
           "solve_s": time.perf_counter() - w, "solve_cpu_s": time.process_time() - c}
    if variant == "QR solve":
        return out
    w, c = time.perf_counter(), time.process_time()
    g = ad.solve_pullback(sol, np.ones(A.shape[1]))       # f = Σx
    if variant == "value + ∂A on pattern":
        P = lo.project(g.A, like=sol.cache.A)
        out["projected_bytes"] = int(np.asarray(P.values).nbytes)
    out.update(grad_s=time.perf_counter() - w, grad_cpu_s=time.process_time() - c)
    U, V = g.A.factors()
    out.update(cotangent=f"{type(g.A).__name__} rank {U.shape[1]}",
               cotangent_bytes=int(U.nbytes + V.nbytes),
               factorizations=sol.stats.factorizations)
    return out


def measure(variant: str, m: int, n: int, cond: float) -> dict:
    """``variant`` (one of :data:`VARIANTS`) at m × n in this process: a warm-up on a small
    problem (imports, SuiteSparseQR's first call), then one timed run (wall and CPU), its peak
    RSS over the RSS after building A, and the load when done.

    Returns
    -------
    dict
        ``row`` = ``'timing'``, ``variant``, ``m``, ``n``, ``nnz``, ``cond``, ``time_s``,
        ``cpu_s``, ``peak_mb``, ``load`` and the facts of :func:`_run`.
    """
    _run(variant, matrix(400, 100, cond), np.ones(400))
    A = matrix(m, n, cond)
    b = np.random.default_rng(1).standard_normal(m)
    base = rss_now()
    reset_peak()
    w, c = time.perf_counter(), time.process_time()
    facts = _run(variant, A, b)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    return {"row": "timing", "variant": variant, "m": m, "n": n, "nnz": int(A.nnz),
            "cond": cond, "time_s": wall, "cpu_s": cpu, "peak_mb": (hwm() - base) / 2**20,
            "load": os.getloadavg()[0], **facts}


def measure_cond(cond: float = 1e10) -> dict:
    """∂(Σx)/∂t of x(t) = (A₀ + t A₁)⁺b at t = 0, cond(A₀) = ``cond`` (m = 60, n = 20): QR,
    the normal equations and 50-digit central differences (mpmath).

    A₀ = U diag(1 … 1/cond) Vᵀ with random orthonormal U, V; the reference differentiates
    mpmath's QR solve with h = 1e-20 at 50 digits. The normal equations form AᵀA (cond²
    = 1e20 here): its Cholesky fails, and an LU of it returns a number without warning.

    Returns
    -------
    dict
        ``row`` = ``'cond'``, ``cond``, ``m``, ``n``, ``reference`` and one entry per method:
        the derivative, or the failure as text; ``skipped`` without mpmath.
    """
    try:
        import mpmath  # noqa: PLC0415 (optional dependency of the bench extra)
    except ImportError:
        return {"row": "cond", "skipped": 'needs mpmath: pip install "linops[bench]"'}
    mpmath.mp.dps = 50
    rng = np.random.default_rng(3)
    m, n = 60, 20
    u, _ = np.linalg.qr(rng.standard_normal((m, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A0 = (u * np.logspace(0, -np.log10(cond), n)) @ v.T
    A1 = rng.standard_normal((m, n)) * 1e-3
    b = rng.standard_normal(m)

    def x_mp(t):
        A = mpmath.matrix(A0.tolist()) + mpmath.mpf(t) * mpmath.matrix(A1.tolist())
        return mpmath.qr_solve(A, mpmath.matrix(b.tolist()))[0]

    h = mpmath.mpf("1e-20")
    fd = float((sum(x_mp(h)) - sum(x_mp(-h))) / (2 * h))
    sol = sv.solve(sv.LeastSquares(sp.csr_array(A0), b), sv.QR())
    out = {"row": "cond", "cond": cond, "m": m, "n": n, "reference": fd,
           "QR (SuiteSparseQR)": float(lo.inner(ad.solve_pullback(sol, np.ones(n)).A,
                                                lo.Dense(A1)))}
    N = A0.T @ A0           # the normal equations: x = N⁻¹Aᵀb, λ = N⁻¹x̄, Ā = rλᵀ − Aλxᵀ

    def by(solve):
        x, lam = solve(A0.T @ b), solve(np.ones(n))
        return float((b - A0 @ x) @ A1 @ lam - (A0 @ lam) @ A1 @ x)

    try:
        c = sl.cho_factor(N)
        out["normal equations (Cholesky of AᵀA)"] = by(lambda r: sl.cho_solve(c, r))
    except np.linalg.LinAlgError as e:
        out["normal equations (Cholesky of AᵀA)"] = f"fails: {e}"
    out["normal equations (LU of AᵀA)"] = by(lambda r: np.linalg.solve(N, r))
    return out


def measure_square_rule() -> dict:
    """LinearSolve.jl's square rule: ∂A of f = Σ A⁺b for a tall and a wide A, ours and the square
    rule −λxᴴ (λ = A⁺ᴴ1), against central differences on every entry.

    The issue: the reverse rules of LinearSolve.jl apply the square system's ∂A = −λxᴴ to a
    non-square solve and drop the residual term r((AᴴA)⁻¹x̄)ᴴ (tall) — ∂b stays right, ∂A is
    silently wrong. Ours is r λᴴ − (Aλ) xᴴ, plus q pᴴ for a wide A (its null-space part).

    Returns
    -------
    dict
        ``row`` = ``'square rule'`` and ``cases``: per shape the max relative error of ours and of
        the square rule.
    """
    rng = np.random.default_rng(9)
    out = {"row": "square rule", "cases": []}
    for m, n in ((7, 4), (4, 7)):
        a = rng.standard_normal((m, n))
        b = rng.standard_normal(m)
        sol = sv.solve(sv.LeastSquares(sp.csr_array(a), b), sv.QR())
        G = lo.to_dense(ad.solve_pullback(sol, np.ones(n)).A)
        h = 1e-6
        fd = np.zeros((m, n))
        for i in range(m):
            for j in range(n):
                E = np.zeros((m, n))
                E[i, j] = h
                fd[i, j] = ((np.linalg.pinv(a + E) @ b).sum()
                            - (np.linalg.pinv(a - E) @ b).sum()) / (2 * h)
        x = np.linalg.pinv(a) @ b
        square = -np.outer(np.linalg.pinv(a).T @ np.ones(n), x)
        scale = np.abs(fd).max()
        out["cases"].append({"shape": f"{m}×{n}", "ours": float(np.abs(G - fd).max() / scale),
                             "square rule": float(np.abs(square - fd).max() / scale)})
    return out


def _child(call: str, timeout: float) -> dict:
    """``m.<call>`` in a fresh interpreter (its peak RSS its own); a failure or a timeout
    comes back as a row with ``skipped``."""
    return in_child("lstsq", call, {"row": call}, timeout)


def format_rows(rows: list[dict]) -> str:
    """The three tables (their columns are in ``legends.LSTSQ``) and what did not run.

    The timing table keeps, per variant, the run with the best wall time (and the best CPU
    time of any run beside it), each against the QR solve's, and that run's own split: the
    time of its ∂A part and (solve + ∂A)/solve within the run, which a loaded machine's
    run-to-run spread does not blur; the normal-equations table the
    derivative by each method and its error against the 50-digit reference; the square-rule table
    the two ∂A errors per shape; the load average at the end.
    """
    out = []
    timing = [r for r in rows if r.get("row") == "timing" and "time_s" in r]
    if timing:
        best = {v: min((r for r in timing if r["variant"] == v), key=lambda r: r["time_s"])
                for v in VARIANTS if any(r["variant"] == v for r in timing)}
        best_cpu = {v: min(r["cpu_s"] for r in timing if r["variant"] == v) for v in best}
        ref = best.get("QR solve")
        cells = []
        for v, r in best.items():
            cells.append({"m×n": f"{r['m']:,}×{r['n']:,}", "nnz": f"{r['nnz']:,}", "method": v,
                          "time s": f"{r['time_s']:.2f}", "cpu s": f"{best_cpu[v]:.2f}",
                          "vs solve": f"{r['time_s'] / ref['time_s']:.2f}" if ref else "—",
                          "cpu vs solve": f"{best_cpu[v] / best_cpu['QR solve']:.2f}"
                          if ref else "—",
                          "∂A s": f"{r['grad_s']:.3f}" if "grad_s" in r else "—",
                          "in-run ratio": f"{(r['solve_s'] + r['grad_s']) / r['solve_s']:.2f}"
                          if "grad_s" in r else "—",
                          "fact.": r["factorizations"], "cotangent": r.get("cotangent", "—"),
                          "cotangent MB": f"{r['cotangent_bytes'] / 1e6:.1f}"
                          if "cotangent_bytes" in r else "—",
                          "peak MB": f"{r['peak_mb']:.0f}", "load": f"{r['load']:.1f}"})
        reps = max(sum(r["variant"] == v for r in timing) for v in best)
        out.append(f"sv.QR least squares at cond ≈ {timing[0]['cond']:.0e}: value alone against "
                   f"value + ∂A (target: vs solve and in-run ratio ≤ 1.3; best of {reps} "
                   f"interleaved runs, each its own process)\n"
                   + markdown_table(cells, list(cells[0])))
    cond = next((r for r in rows if r.get("row") == "cond" and "skipped" not in r), None)
    if cond is not None:
        ref = cond["reference"]
        cells = [{"cond": f"{cond['cond']:.0e}", "method": "50-digit central differences",
                  "∂f/∂t": f"{ref:.12g}", "rel. error": "(reference)"}]
        for k in ("QR (SuiteSparseQR)", "normal equations (Cholesky of AᵀA)",
                  "normal equations (LU of AᵀA)"):
            v = cond[k]
            num = isinstance(v, float)
            cells.append({"cond": f"{cond['cond']:.0e}", "method": k,
                          "∂f/∂t": f"{v:.12g}" if num else v,
                          "rel. error": f"{abs(v - ref) / abs(ref):.1e}" if num else "—"})
        out.append(f"why not the normal equations: ∂(Σx)/∂t along a random dA at m = "
                   f"{cond['m']}, n = {cond['n']} (target: QR ≤ 1e-6)\n"
                   + markdown_table(cells, list(cells[0])))
    ls = next((r for r in rows if r.get("row") == "square rule" and "skipped" not in r), None)
    if ls is not None:
        cells = []
        for c in ls["cases"]:
            cells.append({"case": c["shape"], "method": "linops (r λᴴ − (Aλ) xᴴ, + q pᴴ wide)",
                          "∂A error": f"{c['ours']:.1e}"})
            cells.append({"case": c["shape"], "method": "the square rule −λxᴴ (LinearSolve.jl)",
                          "∂A error": f"{c['square rule']:.1e}"})
        out.append("LinearSolve.jl's square rule for a non-square A: ∂A of f = Σ A⁺b "
                   "against central differences\n"
                   + markdown_table(cells, list(cells[0])))
    out += closing_lines(rows, "variant")
    return "\n\n".join(out)


def main(argv=None) -> list[dict]:
    """``python -m linops bench lstsq``: the tables with their legend, printed and written to
    ``--out``; returns the rows.

    Notes
    -----
    Cost at the defaults: 3 variants × 2 repeats, each a fresh process building A
    (200 000 × 50 000) and factorizing it once (about 1.5 s of QR on two loaded cores; some
    ten seconds per process with the build), plus the two small tables: about two minutes.
    """
    ap = argparse.ArgumentParser(prog="python -m linops bench lstsq",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description=__doc__.split("\n\n")[0].replace("``", ""),
                                 epilog=legend("lstsq"))
    ap.add_argument("--m", type=positive, default=200_000, help="rows; 200000")
    ap.add_argument("--n", type=positive, default=50_000,
                    help="columns (m must be a multiple of n, m ≥ n); 50000")
    ap.add_argument("--cond", type=float, default=1e8, help="condition number; 1e8")
    ap.add_argument("--repeat", type=positive, default=2,
                    help="interleaved repeats of the timing variants (best kept); 2")
    ap.add_argument("--timeout", type=float, default=900.0, metavar="S",
                    help="seconds per measurement (default 900)")
    ap.add_argument("--out", type=Path, default=Path("bench-out"), metavar="DIR",
                    help="folder for lstsq.md and lstsq.json (default bench-out/)")
    docs.add_option(ap)
    args = ap.parse_args(argv)
    docs.check(ap, args.write_docs, "lstsq")
    if args.m % args.n or args.m < args.n:
        ap.error(f"--m must be a multiple of --n (m ≥ n): got m={args.m}, n={args.n}")
    if not args.cond >= 1:
        ap.error(f"--cond must be ≥ 1, got {args.cond}")
    rows = []
    for rep in range(args.repeat):
        order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
        for v in order:
            print(f"[{time.strftime('%H:%M:%S')}] {v} {args.m}×{args.n} ({rep + 1}/"
                  f"{args.repeat})", file=sys.stderr)
            r = _child(f"measure({v!r}, {args.m}, {args.n}, {args.cond!r})", args.timeout)
            r.setdefault("variant", v)
            rows.append(r)
    print(f"[{time.strftime('%H:%M:%S')}] normal equations, the square rule", file=sys.stderr)
    rows.append(_child("measure_cond(1e10)", args.timeout))
    rows.append(_child("measure_square_rule()", args.timeout))
    publish(args.out, "lstsq", format_rows(rows), rows, argv, args.write_docs)
    return rows


if __name__ == "__main__":
    main()
